"""Print the README's first-use commands, one a line, exactly as a newcomer copies them.

They are the lines of the README's first ```bash block, each without its trailing comment.
`.ci/run` runs them verbatim in a fresh clone and a fresh venv, so that a README edit which
breaks a newcomer's first try breaks CI."""

import re
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def commands(text: str) -> list[str]:
    block = re.search(r"^```bash\n(.*?)^```", text, re.S | re.M)
    if block is None:
        sys.exit(f"{README}: no ```bash block with the first-use commands")
    lines = [re.sub(r"\s+#.*$", "", line).strip() for line in block.group(1).splitlines()]
    return [line for line in lines if line]


if __name__ == "__main__":
    found = commands(README.read_text(encoding="utf-8"))
    if len(found) != 2:
        sys.exit(f"{README}: the first ```bash block should hold two commands, not {found}")
    print("\n".join(found))
