"""A stand-in `sglang` package for the bench tests: `Engine` with SGLang's generate() shapes.

Outputs are a function of the prompt only, so every arm is "lossless"; speculative arms report
`spec_verify_ct` and a histogram from a fixed acceptance length; a DDTREE engine started with
SGLANG_DDTREE_PROFILE appends one profile window per generate() call, as ddtree_profile does.
Behaviour switches come from the FAKE_SGLANG environment variable (JSON):
  fail_start_budgets: DDTREE budgets whose engine raises at start
  crash_budgets:      DDTREE budgets whose engine kills its process at the first generate
  die_start_budgets:  DDTREE budgets whose engine prints a scheduler's traceback and kills its
                      process at start (SGLang's scheduler raising during init takes the parent down)
  diverge_budgets:    DDTREE budgets whose outputs differ from target-only at token 3
  margin:             the target's top1-top2 log-prob gap at every token (default 5.0)
  sleep_s:            seconds each generate() takes
  start_sleep_s:      seconds each engine start takes
  fail_health:        the engine raises on the health-check request (max_new_tokens == 4)
  request_s:          seconds each async_generate() request takes (continuous-batching cells)
  at_once:            {engine: N}: the requests the engine's scheduler runs at once (engine named
                      as in replies; default its max_running_requests, else 48)
  default_backend:    the attention backend an engine given none resolves to (default fa3, as
                      on an H200), in ``server_args.attention_backend`` as SGLang's parent has it
  regex_outputs:      {regex: text}: what a request with that ``regex`` in its sampling decodes
                      (the text's bytes, then EOS), whatever its prompt
  regex_break_budgets: DDTREE budgets whose regex outputs start with an "x" the regex never allows
  logprob_shift_budgets: DDTREE budgets whose output-token logprobs are 1.0 below the target's
  replies:            a JSON file {engine: {prompt: {"tokens": [...], "rounds": n}}} (engine
                      "target-only", "DFLASH" or "DDTREE-<B>", prompt its ids joined by commas):
                      those prompts' outputs and verify rounds instead (compare's replays)
`async_generate` (one request, not streamed) runs on the engine's own event loop, `loop`, as
SGLang's does. `start_profile` and `stop_profile` (round_trace's torch-profiler trace) write no
trace.

`install_fake_fa3_env` writes the other stand-in, for the FA3 check before any engine starts
(`bench.fa3_check`): an sgl_kernel with or without FA3 and an sglang whose `ServerArgs` picks
the default attention backend.
"""

from __future__ import annotations

from pathlib import Path

FAKE_SGLANG = r'''
import asyncio, json, math, os, time, types

VOCAB = 272
EOS = 257


def _behaviour():
    return json.loads(os.environ.get("FAKE_SGLANG", "{}"))


class Engine:
    def __init__(self, **kwargs):
        self.kwargs = kwargs
        self.algo = kwargs.get("speculative_algorithm")
        self.budget = kwargs.get("speculative_ddtree_budget")
        self.b = _behaviour()
        backend = kwargs.get("attention_backend") or self.b.get("default_backend", "fa3")
        self.server_args = types.SimpleNamespace(attention_backend=backend)
        time.sleep(self.b.get("start_sleep_s", 0.0))
        self.loop = asyncio.new_event_loop()
        if self.algo == "DDTREE" and self.budget in self.b.get("die_start_budgets", []):
            import sys
            sys.stderr.write("Traceback (most recent call last):\n  File \"scheduler.py\"\n"
                             f"ValueError: fake state refusal at B={self.budget}\n")
            sys.stderr.flush()
            os._exit(9)
        if self.algo == "DDTREE" and self.budget in self.b.get("fail_start_budgets", []):
            raise RuntimeError(f"fake start failure at B={self.budget}")
        self.profile = os.environ.get("SGLANG_DDTREE_PROFILE") if self.algo == "DDTREE" else None
        self.replies = {}
        engine = "target-only" if self.algo is None else self.algo + (f"-{self.budget}" if self.budget else "")
        if self.b.get("replies"):
            with open(self.b["replies"]) as f:
                self.replies = json.load(f).get(engine, {})
        self.at_once = self.b.get("at_once", {}).get(engine, kwargs.get("max_running_requests") or 48)
        logged = dict(kwargs)
        # an arm's "env", and a switch every engine inherits, as the scheduler would see them
        for name in ("SGLANG_DDTREE_TREE_KERNEL", "SGLANG_ENABLE_OVERLAP_PLAN_STREAM"):
            if os.environ.get(name):
                logged[f"env:{name}"] = os.environ[name]
        with open(os.environ["FAKE_SGLANG_LOG"], "a") as f:
            f.write(json.dumps(logged, sort_keys=True) + "\n")

    def _tau(self):
        if self.algo is None:
            return 1.0
        if self.algo in ("NEXTN", "EAGLE3"):  # a chain of 3 drafted tokens
            return 3.0
        return 4.0 if self.algo == "DFLASH" else 4.0 + math.log2(self.budget or 16) / 4  # adaptive: none

    def generate(self, input_ids, sampling_params, return_logprob=False, top_logprobs_num=0):
        if self.algo == "DDTREE" and self.budget in self.b.get("crash_budgets", []):
            os._exit(9)
        per_request = sampling_params if isinstance(sampling_params, list) else [sampling_params] * len(input_ids)
        n = per_request[0]["max_new_tokens"]
        if n == 4 and self.b.get("fail_health"):
            raise RuntimeError("fake KV leak")
        t0 = time.time()
        time.sleep(self.b.get("sleep_s", 0.0))
        diverge = self.algo == "DDTREE" and self.budget in self.b.get("diverge_budgets", [])
        tau = self._tau()
        outs = []
        for prompt, params in zip(input_ids, per_request):
            reply = self.replies.get(",".join(map(str, prompt)))
            ids = reply["tokens"][:n] if reply else [(sum(prompt) + 7 * i) % VOCAB for i in range(n)]
            if params.get("regex"):
                ids = list(self.b["regex_outputs"][params["regex"]].encode()) + [EOS]
                if self.algo == "DDTREE" and self.budget in self.b.get("regex_break_budgets", []):
                    ids.insert(0, ord("x"))
            if diverge and n > 3:
                ids[3] = (ids[3] + 1) % VOCAB
            meta = {"completion_tokens": len(ids), "finish_reason": {"type": "length"}}
            if self.algo is not None:
                rounds = reply["rounds"] if reply and len(ids) == len(reply["tokens"]) else max(1, math.ceil((n - 1) / tau))
                hist = [0] * 16
                hist[min(15, int(tau) - 1)] = rounds
                meta.update(spec_verify_ct=rounds, spec_accept_length=n / rounds,
                            spec_correct_drafts_histogram=hist)
            if return_logprob:
                gap = self.b.get("margin", 5.0)
                meta["output_top_logprobs"] = [[[-0.01, t, None], [-0.01 - gap, 0, None]] for t in ids]
                shift = 1.0 if self.algo == "DDTREE" and self.budget in self.b.get("logprob_shift_budgets", []) else 0.0
                meta["output_token_logprobs"] = [[-0.01 - shift, t, None] for t in ids]
            outs.append({"output_ids": ids, "meta_info": meta})
        if self.profile and n > 4:
            rounds = max(o["meta_info"]["spec_verify_ct"] for o in outs)
            window = {
                "profile_version": 1, "pid": os.getpid(), "t_first": t0, "t_last": time.time(),
                "rounds": rounds, "requests": rounds * len(input_ids),
                "cuda_graph_rounds": rounds, "batch_sizes": {str(len(input_ids)): rounds},
                "ms_sum": {"draft": 1.0 * rounds, "topk": 0.2 * rounds, "tree": 0.3 * rounds,
                           "verify": 2.0 * rounds, "accept": 0.1 * rounds, "commit": 0.4 * rounds,
                           "round": 4.5 * rounds},
            }
            with open(self.profile, "a") as f:
                f.write(json.dumps(window) + "\n")
        return outs

    async def async_generate(self, input_ids, sampling_params):
        await asyncio.sleep(self.b.get("request_s", 0.01))
        return self.generate([input_ids], sampling_params)[0]

    def get_server_info(self):
        return {"internal_states": [{"effective_max_running_requests_per_dp": self.at_once}]}

    def start_profile(self, **kwargs):
        pass

    def stop_profile(self):
        pass

    def shutdown(self):
        self.loop.close()
'''


def install_fake_sglang(root: Path) -> Path:
    """Write the fake package under ``root``; put ``root`` on PYTHONPATH to use it."""
    package = root / "sglang"
    package.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text(FAKE_SGLANG)
    return root


FAKE_SERVER_ARGS = r'''
import os


class ServerArgs:
    """SGLang's default attention backend as 0.5.14 picks it for these targets: fa3 on Hopper
    (compute capability 9.x, from FAKE_CAPABILITY), else flashinfer."""

    def __init__(self, **kwargs):
        if "FAKE_SERVER_ARGS_ERROR" in os.environ:
            raise ValueError(os.environ["FAKE_SERVER_ARGS_ERROR"])
        hopper = os.environ.get("FAKE_CAPABILITY", "9.0").split(".")[0] == "9"
        self.attention_backend = kwargs.get("attention_backend") or ("fa3" if hopper else "flashinfer")
'''


def install_fake_fa3_env(root: Path, *, flash_ops: bool, sgl_kernel: bool = True) -> Path:
    """A stand-in sgl_kernel (with its FA3 extension ``flash_ops`` or without; importing the
    package itself fails, as loading CUDA libraries on a machine without a GPU would) and an
    sglang whose `ServerArgs` resolves the default backend (`FAKE_SERVER_ARGS`), under ``root``;
    put ``root`` on PYTHONPATH to use them."""
    if sgl_kernel:
        kernel = root / "sgl_kernel"
        kernel.mkdir(parents=True, exist_ok=True)
        (kernel / "__init__.py").write_text('raise ImportError("libcuda.so.1: cannot open shared object file")\n')
        if flash_ops:
            (kernel / "flash_ops.py").write_text("")
    srt = root / "sglang" / "srt"
    (srt / "plugins").mkdir(parents=True, exist_ok=True)
    (root / "sglang" / "__init__.py").write_text("")
    (srt / "__init__.py").write_text("")
    (srt / "plugins" / "__init__.py").write_text("def load_plugins():\n    pass\n")
    (srt / "server_args.py").write_text(FAKE_SERVER_ARGS)
    return root
