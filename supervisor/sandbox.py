"""Sandbox profiles: which mechanisms enforce each one here (SPEC §5).

Today only `none` is enforced (own session and process group, whole-tree kill, scrubbed
environment). `strict` and `net` need the namespace, filesystem and limit mechanisms that land
with the sandbox issue; until then a hook asking for them fails with `SandboxUnavailable` —
it is never run with less than it asked for.
"""

from __future__ import annotations

from typing import Final

from .errors import SandboxUnavailable
from .hooks import Profile

#: What each profile needs that this build cannot yet give, by profile.
_MISSING: Final[dict[Profile, str]] = {
    Profile.STRICT: (
        "network namespace, read-only filesystem view, PID namespace and resource limits "
        "are not implemented yet"
    ),
    Profile.NET: "read-only filesystem view, PID namespace and resource limits "
    "are not implemented yet",
}


def require(profile: Profile) -> None:
    """Returns if `profile` can be enforced here; raises `SandboxUnavailable` saying why not."""
    missing = _MISSING.get(profile)
    if missing:
        raise SandboxUnavailable(
            f'sandbox "{profile}" cannot be enforced on this machine: {missing}; '
            'declare sandbox = "none" (in the hook or in [defaults]) to run without isolation'
        )
