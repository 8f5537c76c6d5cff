"""Where a hook was declared, as every message and listing names it: its file and the JSON
pointer of its table there, `FILE:/hooks/N`, the form config problems take. `hooks list`,
`exec --explain`, a refusal naming the file that locked a hook and `validate` all say it so:
a place read in one can be found in the file, or searched for in another's output."""

from __future__ import annotations


def hook_place(file: object, index: object) -> str:
    """Hook `index` of file `file`'s `hooks`, as a problem's place names it."""
    return f"{file}:/hooks/{index}"
