"""Generate korral/si/si_pb2.py and si_pb2_grpc.py from src/si/si.proto with the pinned grpcio-tools.

``make proto`` writes them into src/si; tests/test_grpc_proto.py writes them into a temporary folder and
checks they equal the committed files, so the committed code is always what the proto generates.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

SOURCE = Path(__file__).resolve().parent.parent / "src" / "si" / "si.proto"
GENERATED = ("si_pb2.py", "si_pb2_grpc.py")


def generate(out_dir: Path) -> list[Path]:
    """Write the generated modules into out_dir; return their paths."""
    import grpc_tools
    from grpc_tools import protoc

    with tempfile.TemporaryDirectory() as tmp:
        # protoc names imports after the path under its include root: lay the proto out as
        # korral/si/si.proto so the generated code imports `korral.si.si_pb2`.
        root = Path(tmp)
        (root / "korral" / "si").mkdir(parents=True)
        shutil.copyfile(SOURCE, root / "korral" / "si" / "si.proto")
        well_known = Path(grpc_tools.__file__).parent / "_proto"
        status = protoc.main(
            [
                "grpc_tools.protoc",
                f"-I{root}",
                f"-I{well_known}",
                f"--python_out={root}",
                f"--grpc_python_out={root}",
                "korral/si/si.proto",
            ]
        )
        if status != 0:
            raise RuntimeError(f"protoc failed with status {status}")
        out_dir.mkdir(parents=True, exist_ok=True)
        written = []
        for name in GENERATED:
            target = out_dir / name
            shutil.copyfile(root / "korral" / "si" / name, target)
            written.append(target)
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=SOURCE.parent, help="default: src/si")
    for path in generate(parser.parse_args().out):
        print(f"wrote {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
