"""Progress on long jobs: plain lines on a piped stderr, each step stamped, nothing under --json."""

from __future__ import annotations

import re

import pytest

from ddtree_overlay import render


def test_piped_progress_is_plain_lines_with_the_seconds_since_the_start(capsys: pytest.CaptureFixture[str]) -> None:
    with render.progress(enabled=True) as shown:
        shown.begin(2)
        shown.step("sglang 0.5.23: download")
        shown.detail("Downloading sglang-0.5.23-py3-none-any.whl (4.1 MB)")
        shown.done("sglang 0.5.23: clean in 70 s (download 3 s)")
        shown.log("a line")
    lines = capsys.readouterr().err.splitlines()
    assert re.fullmatch(r"\[ +0 s\] sglang 0\.5\.23: download", lines[0])
    assert lines[1:] == [
        "          Downloading sglang-0.5.23-py3-none-any.whl (4.1 MB)",
        "sglang 0.5.23: clean in 70 s (download 3 s)",
        "a line",
    ]


def test_disabled_progress_shows_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    with render.progress(enabled=False) as shown:
        shown.step("x")
        shown.done("y")
    assert capsys.readouterr() == ("", "")


def test_the_bench_shows_each_engine_as_it_starts(capsys: pytest.CaptureFixture[str]) -> None:
    with render.bench_progress(enabled=True) as on_event:
        on_event({"event": "plan", "cells": 2, "groups": 1, "engines": 1})
        on_event({"event": "start", "arm": "ddtree-b8", "repeat": 1, "est_start_s": 45.0})
        on_event({"event": "engine", "arm": "ddtree-b8", "repeat": 1, "ok": True, "start_s": 41.2})
        on_event({"event": "cell", "arm": "ddtree-b8/bs1/t0", "repeat": 1, "ok": True, "tok_per_s": 812.4})
    err = capsys.readouterr().err
    assert "1 engine(s) to start, 2 cell(s) to decode" in err
    assert "starting engine ddtree-b8, ~45 s" in err
    assert "engine ddtree-b8: ok, started in 41 s" in err and "ddtree-b8/bs1/t0: 812 tok/s" in err


def test_the_checks_name_each_engine_with_its_place_and_only_the_first_as_compiling(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Each preset arm runs in its own runner, so every runner reports a first start; on the
    H200 (2026-12-04) all eight engines of a preset were announced as the one that compiles."""
    with render.arm_progress(2, enabled=True) as on_arm:
        for arm in ("plain", "ddtree-b32"):
            on_arm({"event": "start", "arm": arm})
            on_arm({"arm": arm, "ok": True})
    lines = capsys.readouterr().err.splitlines()
    assert re.fullmatch(r"\[ +0 s\] starting the plain engine, 1 of 2 \(the first one compiles kernels\)", lines[0])
    assert re.fullmatch(r"\[ +0 s\] starting the ddtree-b32 engine, 2 of 2", lines[2])
    assert lines[1::2] == ["  plain: ok", "  ddtree-b32: ok"]
