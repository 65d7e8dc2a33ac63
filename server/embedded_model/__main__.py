"""`python -m server.embedded_model [--out DIR] [--force]`: build the embedded default model."""

import argparse
from pathlib import Path

from server.embedded_model.builder import DEFAULT_MODEL_DIR, build_embedded_model, ensure_embedded_model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=DEFAULT_MODEL_DIR, help="target directory")
    parser.add_argument("--force", action="store_true", help="rebuild even if the model is present")
    args = parser.parse_args()
    path = build_embedded_model(args.out) if args.force else ensure_embedded_model(args.out)
    print(path)


if __name__ == "__main__":
    main()
