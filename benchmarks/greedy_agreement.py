"""Greedy continuations of this engine beside llama.cpp's on the same GGUF file and prompt ids:

    python -m benchmarks.greedy_agreement [--model gemma3-270m] [--tokens 32] [--quantization auto]

llama.cpp quantizes activations to 8 bits in its quantized products and this engine (by default)
re-quantizes the file's blocks per output channel, so exact equality is not expected: the report
says, per prompt, how many leading tokens agree and where they part, and the share of positions
that agree overall (after a divergence the two continue from different texts, so that share is a
lower bound of per-token agreement). Prompts: the first ShareGPT questions, chat-templated where
the model has a template, cut to 128 tokens. llama.cpp comes from `make peers`.
"""

from __future__ import annotations

import argparse

from benchmarks.common import machine_line
from benchmarks.peers import llama_cpp_greedy
from engine import EngineConfig, LLMEngine, SamplingParams
from engine.loading.sharegpt import load_sharegpt


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="gemma3-270m")
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--quantization", default="auto")
    args = parser.parse_args()
    engine = LLMEngine(EngineConfig(model=args.model, quantization=args.quantization, compile_decode="off"))
    tokenizer = engine.tokenizer
    prompts = []
    for conversation in load_sharegpt().conversations[: args.prompts]:
        text = conversation.prompt
        if tokenizer.chat_template:
            text = tokenizer.apply_chat_template([{"role": "user", "content": text}])
        prompts.append(tokenizer.encode(text)[:128])
    ours = [
        output.token_ids
        for output in engine.generate(prompts, SamplingParams(max_tokens=args.tokens, temperature=0.0, ignore_eos=True))
    ]
    peer = llama_cpp_greedy(engine.model_path, prompts, args.tokens)
    if peer is None:
        raise SystemExit("llama.cpp is not built: make peers")
    print(
        f"machine: {machine_line()}; {args.model}, quantization {engine.config.quantization} "
        f"({engine.quantization_choice}); llama.cpp {peer['version']}"
    )
    agreeing = 0
    for number, (mine, theirs) in enumerate(zip(ours, peer["continuations"]), start=1):
        common = next((index for index, (a, b) in enumerate(zip(mine, theirs)) if a != b), len(mine))
        agreeing += sum(a == b for a, b in zip(mine, theirs))
        parted = (
            "all agree"
            if common == len(mine)
            else (
                f"part at token {common + 1}: {tokenizer.decode(mine[common : common + 4])!r} vs "
                f"{tokenizer.decode(theirs[common : common + 4])!r}"
            )
        )
        print(
            f"  prompt {number} ({len(prompts[number - 1])} tokens): "
            f"{common}/{len(mine)} leading tokens agree; {parted}"
        )
    total = sum(len(ids) for ids in ours)
    print(f"positions agreeing: {agreeing}/{total} ({100 * agreeing / total:.1f}%), n = {len(ours)} prompts")


if __name__ == "__main__":
    main()
