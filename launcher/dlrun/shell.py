"""Shell words: every value dlrun writes into a script is single-quoted, except the words dlrun itself
marks to expand (`Expand`) or builds from parts (`Concat`). Nothing here knows about plans or jobs."""
from __future__ import annotations

import shlex


class Expand(str):
    """A word dlrun itself writes that must expand in the shell (e.g. `${DLRUN_RUN_DIR}/logs`).

    Never built from user input: everything else is single-quoted by `quote`.
    """


class SecretRef(Expand):
    """`${NAME}` of a secret variable (see dlrun.secrets): its value comes from the job's environment when the
    script runs and is never written. Runtimes pass it on by name, not as a command-line value."""

    def __new__(cls, name: str) -> "SecretRef":
        ref = super().__new__(cls, "${" + name + "}")
        ref.name = name
        return ref

    name: str


class Concat(str):
    """One shell word made of parts, each quoted its own way: `Expand` parts expand, the rest stays literal.
    E.g. Concat(Expand("--mounts=${DLRUN_RUN_DIR}"), ",", user_path)."""

    parts: tuple[str, ...]

    def __new__(cls, *parts: str) -> "Concat":
        word = super().__new__(cls, "".join(parts))
        word.parts = tuple(part for part in parts if part)
        return word


def quote(word: str) -> str:
    if isinstance(word, Concat):
        return "".join(quote(part) for part in word.parts) or "''"
    if isinstance(word, Expand):
        return f'"{word}"'
    return shlex.quote(word)


def join(argv: list[str]) -> str:
    return " ".join(quote(word) for word in argv)


def export_lines(env: dict[str, str]) -> list[str]:
    return [f"export {name}={quote(value)}" for name, value in sorted(env.items())]
