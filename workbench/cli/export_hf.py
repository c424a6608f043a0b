"""`workbench export-hf`: a model written as a Hugging Face directory, for vLLM or SGLang to serve."""

from __future__ import annotations

from pathlib import Path


def add_to(commands) -> None:
    export = commands.add_parser(
        "export-hf", help="write a model as a Hugging Face directory (for vLLM or SGLang to serve)"
    )
    export.add_argument(
        "--model", default="smollm2-135m", help="the bundled alias, a .gguf file or a Hugging Face folder"
    )
    export.add_argument("--out", required=True, type=Path, help="the directory to write")
    export.add_argument("--dtype", choices=("bfloat16", "float32"), default="bfloat16")
    export.set_defaults(handler=run)


def run(args) -> int:
    from engine.loading.model_source import read_model
    from workbench.quality.export_hf import export_hf_directory

    print(f"wrote {export_hf_directory(read_model(args.model), args.out, args.dtype)}")
    return 0
