"""`kformer ...`: argument parsing and calls into the package, nothing more."""

import argparse
import sys


def _walkthrough(args):
    from kformer import walkthrough

    print(walkthrough.bumrah_report())
    print()
    print(walkthrough.black_cat_report())


def build_parser():
    parser = argparse.ArgumentParser(prog="kformer", description="A Transformer built from scratch as Keras 3 layers.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    walkthrough = commands.add_parser(
        "walkthrough", help="print the seeds' worked examples, computed by kformer's layers"
    )
    walkthrough.set_defaults(run=_walkthrough)
    return parser


def main(argv=None):
    args = build_parser().parse_args(argv)
    args.run(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
