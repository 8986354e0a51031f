"""Generates the gRPC stubs of src/leasehold/v1 from the repository's proto/ (the one source of
the API), with the grpcio-tools version that pyproject.toml's `test` extra pins:

    python gen_stubs.py            # rewrite the stubs
    python gen_stubs.py --check    # exit 1 if the committed stubs differ from the proto

The stubs' package is `leasehold.v1`, as the proto's, so they import each other unchanged.
"""

import argparse
import filecmp
import pathlib
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
PROTO_ROOT = HERE.parent.parent / "proto"
PROTO = "leasehold/v1/leasehold.proto"
STUBS = HERE / "src" / "leasehold" / "v1"
GENERATED = ("leasehold_pb2.py", "leasehold_pb2.pyi", "leasehold_pb2_grpc.py")


def generate(into: pathlib.Path) -> None:
    from grpc_tools import protoc

    args = [
        "grpc_tools.protoc",
        f"--proto_path={PROTO_ROOT}",
        f"--python_out={into}",
        f"--pyi_out={into}",
        f"--grpc_python_out={into}",
        PROTO,
    ]
    if protoc.main(args) != 0:
        sys.exit(f"protoc failed on {PROTO_ROOT / PROTO}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare instead of writing")
    check = parser.parse_args().check
    with tempfile.TemporaryDirectory() as tmp:
        generate(pathlib.Path(tmp))
        fresh = pathlib.Path(tmp) / "leasehold" / "v1"
        differ = [
            name
            for name in GENERATED
            if not (STUBS / name).exists() or not filecmp.cmp(fresh / name, STUBS / name, shallow=False)
        ]
        if check:
            if differ:
                print(f"stale stubs: {', '.join(differ)}; run python {__file__}", file=sys.stderr)
                return 1
            return 0
        STUBS.mkdir(parents=True, exist_ok=True)
        for name in GENERATED:
            (STUBS / name).write_bytes((fresh / name).read_bytes())
    return 0


if __name__ == "__main__":
    sys.exit(main())
