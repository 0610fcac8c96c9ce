"""nn uses only tensorlab's public names: no ``from tensorlab.x import _name``, no
``tensorlab.x._name`` attribute, no import of a private module (issue 44). Read from the source
(ast), function-level imports included."""

from __future__ import annotations

import ast
from pathlib import Path

NN = Path(__file__).resolve().parents[2] / "nn"


def private_uses(source: str) -> list[str]:
    """The private tensorlab names a module's source reaches for."""
    found, aliases = [], set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tensorlab"):
            parts = node.module.split(".")
            found += [node.module] if any(p.startswith("_") for p in parts) else []
            found += [f"{node.module}.{a.name}" for a in node.names if a.name.startswith("_")]
            aliases |= {a.asname or a.name for a in node.names}
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("tensorlab"):
                    aliases.add((a.asname or a.name).split(".")[0])
                    found += [a.name] if any(p.startswith("_") for p in a.name.split(".")) else []
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Attribute)
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
            and isinstance(node.value, ast.Name)
            and node.value.id in aliases
        ):
            found.append(f"{node.value.id}.{node.attr}")
    return found


def test_nn_uses_only_public_engine_names():
    uses = {p.name: private_uses(p.read_text(encoding="utf-8")) for p in sorted(NN.glob("*.py"))}
    assert {name: u for name, u in uses.items() if u} == {}


def test_the_reader_finds_private_uses():
    source = (
        "import tensorlab as tl\n"
        "from tensorlab.fused import _namespace, fused\n"
        "def f(x):\n"
        "    from tensorlab._impl import thing\n"
        "    return tl._modes, tl.exp(x)\n"
    )
    assert sorted(private_uses(source)) == [
        "tensorlab._impl",
        "tensorlab.fused._namespace",
        "tl._modes",
    ]
