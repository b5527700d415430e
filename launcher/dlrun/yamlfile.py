"""The one reader of YAML files (catalogs, `config.yaml`, the image lock, `--references`): bounded before any
model or caller sees the data.

YAML aliases make a file of a kilobyte stand for gigabytes: nine levels of nine aliases each (`a1: [*a0,
*a0, ...]`, "billion laughs") are 9**9 values once something walks them (pydantic copying a list, a JSON
dump of the plan). PyYAML shares the anchored node, so composing the node graph costs only the file's own
size; here that graph is measured before anything is built from it: how many aliases it uses, and how
many values and characters it would hold with every alias expanded (memoised per anchored node, so the
measuring costs the graph's size, not the expansion's). A file over a bound, a recursive alias, a file
larger than `MAX_BYTES`, nesting deeper than the parser takes, or text that is not UTF-8 is one line
`path:line: what`, exit 2.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from dlrun.errors import DlrunError
from dlrun.files import open_regular

#: The largest YAML file read (the biggest built-in catalog file is 16 KB; an image lock of a few hundred
#: images is a few hundred KB).
MAX_BYTES = 4 << 20
#: Alias uses (`*name`, `<<: *name`) in one file: a site's catalog uses a few per entry.
MAX_ALIASES = 1000
#: Values (mappings, lists, scalars) and scalar characters the file holds with every alias expanded.
MAX_EXPANDED_VALUES = 1_000_000
MAX_EXPANDED_CHARS = 4 * MAX_BYTES


class YamlError(DlrunError):
    """A YAML file that cannot be read, or is over a bound: `path:line: what`, exit 2."""

    exit_code = 2


class BoundedLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """PyYAML's safe loader (LibYAML's parser when PyYAML has it); `read_yaml` bounds what it builds."""


def _line(node: yaml.Node | None) -> int:
    return node.start_mark.line + 1 if node is not None and node.start_mark is not None else 1


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def check_expansion(root: yaml.Node, source: str) -> None:
    """Refuse a node graph whose aliases are too many, recursive, or expand past the bounds (module notes).
    Iterative and memoised: each distinct node is measured once, whatever refers to it."""
    sizes: dict[int, tuple[int, int]] = {}
    on_path: set[int] = set()
    aliases = 0
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        if done:
            on_path.discard(key)
            values, chars = 1, len(node.value) if isinstance(node, yaml.ScalarNode) else 0
            for child in _children(node):
                child_values, child_chars = sizes[id(child)]
                values, chars = values + child_values, chars + child_chars
            if values > MAX_EXPANDED_VALUES or chars > MAX_EXPANDED_CHARS:
                raise YamlError(f"{source}:{_line(node)}: with its aliases expanded this YAML holds more than "
                                f"{MAX_EXPANDED_VALUES:,} values or {MAX_EXPANDED_CHARS:,} characters (an alias "
                                "bomb?); refused before reading it; valid: the values written out, or fewer aliases")
            sizes[key] = (values, chars)
        elif key in on_path:
            raise YamlError(f"{source}:{_line(node)}: an alias refers to a value that holds it (a recursive "
                            "alias); valid: aliases to values defined before and outside them")
        elif key in sizes:
            aliases += 1
            if aliases > MAX_ALIASES:
                raise YamlError(f"{source}:{_line(node)}: more than {MAX_ALIASES:,} aliases in one file; refused "
                                "before reading it; valid: the values written out, or fewer aliases")
        else:
            on_path.add(key)
            stack.append((node, True))
            stack.extend((child, False) for child in _children(node))


def parse_yaml(text: str, source: str, loader: type = BoundedLoader) -> tuple[Any, yaml.Node | None]:
    """(data, node tree) of one YAML document, its node graph checked (`check_expansion`) before the data is
    built from it; `source` names it in errors."""
    if len(text) > MAX_BYTES:
        raise YamlError(f"{source}:1: {len(text):,} characters, more than the {MAX_BYTES:,} a YAML file may hold")
    reader = loader(text)
    try:
        node = reader.get_single_node()
        if node is None:
            return None, None
        check_expansion(node, source)
        return reader.construct_document(node), node
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = " ".join(str(getattr(exc, "problem", None) or exc).split())
        raise YamlError(f"{source}:{mark.line + 1 if mark else 1}: invalid YAML: {problem}") from None
    except RecursionError:
        raise YamlError(f"{source}:1: YAML nested too deeply; valid: at most a few hundred levels") from None
    finally:
        reader.dispose()


def read_text(path: Path, what: str = "YAML file") -> str:
    """A YAML file's text: a regular file of at most MAX_BYTES, UTF-8."""
    handle, size = open_regular(path, what)
    with handle:
        if size > MAX_BYTES:
            raise YamlError(f"{path}:1: {size:,} bytes, more than the {MAX_BYTES:,} a YAML file may hold")
        data = handle.read(MAX_BYTES + 1)
    if len(data) > MAX_BYTES:
        raise YamlError(f"{path}:1: more than the {MAX_BYTES:,} bytes a YAML file may hold")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise YamlError(f"{path}:{line}: not UTF-8 text (byte {exc.start}); valid: a UTF-8 YAML file") from None


def read_yaml(path: Path, what: str = "YAML file", loader: type = BoundedLoader) -> tuple[Any, yaml.Node | None]:
    """(data, node tree) of the YAML file at `path` (`parse_yaml`, `read_text`)."""
    return parse_yaml(read_text(path, what), str(path), loader)


def load_yaml(path: Path, what: str = "YAML file") -> Any:
    """The data of the YAML file at `path`, bounded (module notes)."""
    return read_yaml(path, what)[0]
