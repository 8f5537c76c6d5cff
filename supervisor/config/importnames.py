"""The names `init --from` gives the hooks it converts: unique, and made of what a hook's name
may hold. An entry's own id (pre-commit) or name (lefthook) where it can be; else the same
with each run of other characters as `-`, and `-2`, `-3`, … after a name already given. A
hook named otherwise than its entry gets a note saying so, and how to leave out every hook
that entry's word named: pre-commit's `SKIP=mypy` left out each hook with the id `mypy`,
`MCPX_HOOKS_SKIP` takes each name.
"""

from __future__ import annotations

import re


class HookNames:
    """Gives unique hook names; `word` is what the source calls an entry's name (`id`)."""

    def __init__(self, word: str) -> None:
        self.word = word
        self.taken: set[str] = set()
        self.next: dict[str, int] = {}
        self.given: dict[str, list[str]] = {}

    def __call__(self, raw: object) -> tuple[str, str | None]:
        """The name for the entry named `raw`, and a note when it is not `raw` itself."""
        own = str(raw)
        base = re.sub(r"[^A-Za-z0-9_.-]+", "-", own).strip("-") or "hook"
        name = base
        while name in self.taken:
            self.next[base] = self.next.get(base, 1) + 1
            name = f"{base}-{self.next[base]}"
        self.taken.add(name)
        same = self.given.setdefault(own, [])
        same.append(name)
        if name == own:
            return name, None
        skip = f"MCPX_HOOKS_SKIP={','.join(same)}"
        if base == own:
            return name, (
                f'its {self.word} "{own}" is taken: named "{name}" here ({skip} leaves out'
                f" every hook of that {self.word})"
            )
        return name, (
            f'its {self.word} "{own}" is named "{name}" here (a name holds letters, digits,'
            f' "_", "." and "-"; {skip} leaves it out)'
        )
