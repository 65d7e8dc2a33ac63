import sys

from gonka.mlnode.client.cli import main

if __name__ == "__main__":
    sys.exit(main())
