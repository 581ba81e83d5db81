"""The per-attempt record path alone: writing a record and its index entry (`to_text`,
`index_entry`), or reading an index line back (`parse_line`), N times.

Count its instructions with cachegrind (the load of a shared machine does not change them);
per call = (I refs at N=2000 - I refs at N=0) / 2000:

    valgrind --tool=cachegrind --cache-sim=no --cachegrind-out-file=/dev/null \\
        python bench/record_write.py write 2000
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent.parent / "tests"))

from pytest_agenteval.core.records import index_entry, placed, to_json_text
from pytest_agenteval.store.index import parse_line
from test_record_format import examples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("op", choices=("write", "read"))
    parser.add_argument("n", type=int)
    parser.add_argument("--kind", default="plain", choices=sorted(examples()))
    args = parser.parse_args()
    record = examples()[args.kind]
    line = placed(to_json_text(index_entry(record)), 0, 1).encode()
    for _ in range(args.n):
        if args.op == "write":
            record.to_text()
            to_json_text(index_entry(record))
        else:
            parse_line(line, {}, True)


if __name__ == "__main__":
    main()
