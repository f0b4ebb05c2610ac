"""Fake TP ranks on the CPU: a function run on `world` spawned processes joined by a gloo group."""

from __future__ import annotations

import torch.multiprocessing as mp


def run_ranks(tmp_path, main, *, world: int, args: tuple) -> dict:
    """main(rank, world, init_file, *args, out) on `world` gloo ranks; out[rank] as they left it."""
    manager = mp.get_context("spawn").Manager()
    out = manager.dict()
    mp.start_processes(
        main,
        args=(world, str(tmp_path / "init"), *args, out),
        nprocs=world,
        start_method="spawn",
    )
    return dict(out)
