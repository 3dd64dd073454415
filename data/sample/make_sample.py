"""Rebuild `data/sample/train.jsonl` from Debian's King James Bible packages.

    python data/sample/make_sample.py            # needs apt-get and dpkg-deb (Debian/Ubuntu)

One JSON line per chapter (1,189 documents, about 4 MB): {"text": "...", "id": "Genesis 1"}.
The packages' reader program decodes their compressed text; it is run from a scratch
directory, nothing is installed. See README.md here for the source and licence.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

PACKAGES = ("bible-kjv", "bible-kjv-text")
HEADER = re.compile(r"^(?P<book>\S.*) (?P<chapter>\d+)$")
VERSE = re.compile(r"^\s+\d+ (?P<text>.*)$")


def extract_text(workdir: Path) -> str:
    subprocess.run(["apt-get", "download", *PACKAGES], cwd=workdir, check=True)
    root = workdir / "root"
    for deb in sorted(workdir.glob("*.deb")):
        subprocess.run(["dpkg-deb", "-x", str(deb), str(root)], check=True)
    reader = root / "usr/bin/bible"
    # -l with a huge width: one verse per line, never wrapped.
    out = subprocess.run(
        [str(reader), "-p", str(root / "usr/lib"), "-l", "1000000", "Gen1:1-Rev22:21"],
        check=True,
        capture_output=True,
        text=True,
    )
    return out.stdout


def chapters(text: str) -> list[dict[str, str]]:
    docs: list[dict[str, str]] = []
    for line in text.splitlines():
        if HEADER.match(line):
            docs.append({"id": line, "text": ""})
        elif (verse := VERSE.match(line)) and docs:
            sep = "\n" if docs[-1]["text"] else ""
            docs[-1]["text"] += sep + verse["text"].strip()
    return [d for d in docs if d["text"]]


def main() -> int:
    out = Path(__file__).with_name("train.jsonl")
    with tempfile.TemporaryDirectory() as tmp:
        docs = chapters(extract_text(Path(tmp)))
    with out.open("w", encoding="utf-8") as f:
        for doc in docs:
            f.write(json.dumps({"text": doc["text"], "id": doc["id"]}, ensure_ascii=False) + "\n")
    print(f"wrote {len(docs)} documents to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
