"""`python -m server.embedded_model [--variant NAME] [--out DIR] [--force] [--tokenizer-from DIR]`: build the embedded
model or one of its variants (variants.py; by default into the variant's own directory under .build/models)."""

import argparse
from pathlib import Path

from server.embedded_model.builder import build_embedded_model, ensure_embedded_model
from server.embedded_model.variants import DEFAULT_VARIANT, VARIANTS


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--variant", choices=list(VARIANTS), default=DEFAULT_VARIANT.name, help="which variant")
    parser.add_argument("--out", type=Path, help="target directory (default: the variant's own)")
    parser.add_argument("--force", action="store_true", help="rebuild even if the model is present")
    parser.add_argument(
        "--tokenizer-from", type=Path, help="copy the tokenizer files of this built model (a host without dashscope)"
    )
    args = parser.parse_args()
    variant = VARIANTS[args.variant]
    build = build_embedded_model if args.force else ensure_embedded_model
    print(build(args.out, variant, args.tokenizer_from))


if __name__ == "__main__":
    main()
