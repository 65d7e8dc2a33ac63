"""Where a model's forward stops reproducing itself: runs the same greedy request several times in one in-process
vLLM engine (eager, prefix caching off, so every run computes every token) and, for each rerun, prints the prompt
logprobs' largest difference, both runs' tokens and the first modules whose outputs differ (forward hooks on every
module, outputs copied to the CPU in call order). A deterministic forward prints no module at all.

Requests: 64 random token ids three times, the same after a 300-token request (another history of the KV cache),
and 7 ids twice (a step of at most 16 tokens: some kernels take a separate small-batch path there). 4 tokens each,
top-5 logprobs, the prompt's logprobs.

Prints figures; asserts nothing. On a GPU host, e.g. the DeepSeek-V4 tiny variant (docs/gpu.md):
    python3 tests/gpu/module_divergence.py --model .build/models/deepseek-v4-tiny --kv-cache-dtype fp8
A module output that holds values no layer computes (1e38, NaN) points at memory a kernel left unwritten.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import nn

# The hooks live in this process, so the engine must too.
os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"

from vllm import LLM, SamplingParams
from vllm.inputs import TokensPrompt

SHOWN_MODULES = 25
PROMPT_LENGTHS = {"64 ids": 64, "300 ids": 300, "7 ids": 7}


@dataclass
class ModuleRecorder:
    """Every module's output tensors while `on`, in call order."""

    on: bool = False
    calls: list[tuple[str, list[torch.Tensor]]] = field(default_factory=list)

    def install(self, model: nn.Module) -> int:
        for name, module in model.named_modules():
            module.register_forward_hook(self._hook_for(name or "<model>"))
        return sum(1 for _ in model.named_modules())

    def _hook_for(self, name: str) -> Callable[[nn.Module, object, object], None]:
        def hook(module: nn.Module, inputs: object, output: object) -> None:
            if self.on:
                self.calls.append((name, [t.detach().float().cpu().clone() for t in _tensors(output)]))

        return hook


@dataclass(frozen=True)
class Run:
    prompt_logprobs: torch.Tensor
    tokens: list[int]
    first_top: dict[int, float]
    calls: list[tuple[str, list[torch.Tensor]]]


def _tensors(output: object) -> list[torch.Tensor]:
    if isinstance(output, torch.Tensor):
        return [output]
    if isinstance(output, (tuple, list)):
        return [tensor for item in output for tensor in _tensors(item)]
    return []


def run_once(llm: LLM, recorder: ModuleRecorder, prompt: list[int]) -> Run:
    params = SamplingParams(max_tokens=4, temperature=0.0, logprobs=5, prompt_logprobs=1)
    recorder.calls = []
    recorder.on = True
    output = llm.generate([TokensPrompt(prompt_token_ids=prompt)], params, use_tqdm=False)[0]
    recorder.on = False
    prompt_logprobs = [next(iter(entry.values())).logprob if entry else 0.0 for entry in output.prompt_logprobs or []]
    completion = output.outputs[0]
    first_top = {token: entry.logprob for token, entry in (completion.logprobs or [{}])[0].items()}
    return Run(torch.tensor(prompt_logprobs), list(completion.token_ids), first_top, list(recorder.calls))


def compare(label: str, first: Run, again: Run) -> None:
    prompt_gap = float((first.prompt_logprobs - again.prompt_logprobs).abs().max())
    top_gap = max(abs(value - again.first_top.get(token, float("nan"))) for token, value in first.first_top.items())
    print(
        f"{label}: prompt logprobs max |diff| {prompt_gap:.3e}, first top-5 max |diff| {top_gap:.3e}, "
        f"tokens {first.tokens} vs {again.tokens}"
    )
    shown = 0
    for index, ((name, outputs), (_, outputs_again)) in enumerate(zip(first.calls, again.calls, strict=True)):
        gap = max(
            (
                float((a - b).abs().max()) if a.shape == b.shape else float("inf")
                for a, b in zip(outputs, outputs_again)
            ),
            default=0.0,
        )
        if gap != 0.0 and shown < SHOWN_MODULES:
            largest = max((float(a.abs().max()) for a in outputs), default=0.0)
            shapes = [tuple(a.shape) for a in outputs]
            print(f"   call {index:4d} {name}: max |diff| {gap:.3e} (max |x| {largest:.3e}) shapes {shapes}")
            shown += 1
    print(f"   {len(first.calls)} module calls compared")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True)
    parser.add_argument("--kv-cache-dtype", default="auto")
    parser.add_argument("--max-model-len", type=int, default=4096)
    args = parser.parse_args()
    llm = LLM(
        model=args.model,
        kv_cache_dtype=args.kv_cache_dtype,
        max_model_len=args.max_model_len,
        enforce_eager=True,
        enable_prefix_caching=False,
    )
    recorder = ModuleRecorder()
    print("modules hooked:", llm.apply_model(recorder.install))
    generator = torch.Generator().manual_seed(7)
    prompts = {
        name: torch.randint(1000, 100000, (length,), generator=generator).tolist()
        for name, length in PROMPT_LENGTHS.items()
    }
    first = run_once(llm, recorder, prompts["64 ids"])
    for attempt in (2, 3):
        compare(f"64 ids, run {attempt}", first, run_once(llm, recorder, prompts["64 ids"]))
    run_once(llm, recorder, prompts["300 ids"])
    compare("64 ids after 300 ids", first, run_once(llm, recorder, prompts["64 ids"]))
    short = run_once(llm, recorder, prompts["7 ids"])
    compare("7 ids, run 2", short, run_once(llm, recorder, prompts["7 ids"]))


if __name__ == "__main__":
    main()
