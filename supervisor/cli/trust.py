"""`trust [FILE…]`, `trust --list` and `untrust FILE…`: which project config files apply.

A project file (`.mcpx-hooks.toml` / `.json` found in the directory chain) is applied only
once its place and SHA-256 are in the trust state (`config/truststore.py`). `trust` with no
FILE trusts the project files of the working directory's chain (discovery's, even with
`MCPX_HOOKS_NO_DISCOVERY` set: trusting is not applying) that are the user's own (or
root's); one another user owns is trusted only when named. Exit codes: 0 done; 1 the state
could not be written; 2 bad input (a name that is not a project file, a file that is not a
regular file, a file that does not validate (each problem printed with its file and JSON
pointer; the file is not trusted), no state directory, a state file that cannot be
believed, `untrust` of a file not trusted).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from ..core.places import shown_file
from .common import EXIT_FAILED, EXIT_OK, EXIT_USAGE, say, usage

TYPE_CHECKING = False  # as typing.TYPE_CHECKING (True to type checkers), without importing typing
if TYPE_CHECKING:
    import argparse
    from collections.abc import Mapping

    from ..config.trust import TrustState
    from ..core.errors import Problem


def add_trust_arguments(t: argparse.ArgumentParser) -> None:
    t.add_argument(
        "files",
        nargs="*",
        metavar="FILE",
        help="project config files (default: those found from / down to here); with"
        " --servers, tool server names (default: every one declared)",
    )
    t.add_argument("--list", action="store_true", help="list the files trusted, and their state")
    t.add_argument("--json", action="store_true", help="--list as a JSON array")
    t.add_argument(
        "--servers",
        action="store_true",
        help="pin the tool lists of tool servers (started here) instead of trusting files",
    )
    t.add_argument(
        "--config",
        action="append",
        default=[],
        metavar="F",
        help="with --servers: a config file declaring them (repeatable)",
    )


def add_untrust_arguments(u: argparse.ArgumentParser) -> None:
    u.add_argument("files", nargs="+", metavar="FILE", help="project config files")


def trust(args: argparse.Namespace) -> int:
    if args.servers:
        if args.list or args.json:
            return usage("trust", "--servers pins; --list and --json list the files")
        from .pinning import pin_servers

        return pin_servers(args)
    if args.config:
        return usage("trust", "--config goes with --servers")
    if args.list:
        if args.files:
            return usage("trust", "--list takes no FILE")
        return _list(args.json)
    if args.json:
        return usage("trust", "--json goes with --list")
    from ..config.files import LOCAL_NAMES, NO_DISCOVERY_ENV, discover
    from ..config.trust import trust_command

    if args.files:
        paths = [Path(f) for f in args.files]
    else:
        environ = {k: v for k, v in os.environ.items() if k != NO_DISCOVERY_ENV}
        found = [f.path for f in discover(Path.cwd(), environ) if f.project]
        if not found:
            names = " or ".join(LOCAL_NAMES)
            here = shown_file(str(Path.cwd()))
            return usage("trust", f"no {names} from / down to {here}: nothing to trust")
        paths = [p for p in found if _yours(p)]
        for path in found:
            if path not in paths:  # (someone who can write /tmp could have put it there)
                usage("trust", f"{shown_file(str(path))} is not yours (owner uid {_owner(path)}):"
                      f" not trusted; name it to trust it: {trust_command(str(path))}")  # fmt: skip
        if len(paths) < len(found):
            return max(_change(paths, untrusting=False), EXIT_USAGE)
    return _change(paths, untrusting=False)


def _owner(path: Path) -> int | None:
    try:
        return path.lstat().st_uid
    except OSError:
        return None


def _yours(path: Path) -> bool:
    """Whether the project file `path` found in the directory chain is this user's or
    root's: one another user owns is trusted only when named."""
    return _owner(path) in (os.getuid(), 0, None)


def untrust(args: argparse.Namespace) -> int:
    return _change([Path(f) for f in args.files], untrusting=True)


def _change(paths: list[Path], *, untrusting: bool) -> int:
    """Trusts (or untrusts) `paths` in one locked read-modify-write of the state."""
    from ..config.loading import validate_files
    from ..config.statefiles import StateError, checkout_holding, checkout_said, state_path
    from ..config.trust import TrustEntry, digest
    from ..config.truststore import locked_state, save_state, trust_key
    from ..core.frames import now_rfc3339

    command = "untrust" if untrusting else "trust"
    where = state_path(os.environ)
    if where is None:
        return usage(command, "no state directory: set XDG_STATE_HOME or HOME")
    code = EXIT_OK
    said: list[str] = []
    try:
        with locked_state(where) as before:
            after = before
            for path in paths:
                key = trust_key(path)
                if untrusting:
                    if key not in after.files:
                        why = (
                            f"{shown_file(key)} is not trusted (trust --list shows those that are)"
                        )
                        code = usage(command, why)
                    else:
                        after = after.without(key)
                        said.append(f"untrusted {shown_file(key)}")
                    continue
                data, why = _project_bytes(path)
                if data is None:
                    code = usage(command, why)
                    continue
                if tree := checkout_holding(where.parent, path.parent):  # (never believed)
                    why = checkout_said(where.parent, tree, trusting=True)
                    say(f"mcpx-hooks {command}: {shown_file(key)}: {why}")
                    code = EXIT_FAILED
                    continue
                if problems := validate_files([path], data=data) or _layered_problems(path):
                    for problem in problems:
                        say(str(problem))
                    why = (
                        f"{shown_file(str(path))} does not validate ({len(problems)} problem(s),"
                        " above): not trusted; fix it, then trust it"
                    )
                    code = usage(command, why)
                    continue
                sha = digest(data)
                old = after.files.get(key)
                if old is not None and old.sha256 == sha:
                    said.append(f"already trusted: {shown_file(key)} (sha256 {sha})")
                    continue
                after = after.with_file(key, TrustEntry(sha, now_rfc3339()))
                said.append(f"trusted {shown_file(key)} (sha256 {sha})")
            if after != before:
                save_state(where, after)
    except StateError as exc:
        say(f"mcpx-hooks {command}: {exc}")
        return EXIT_USAGE if exc.bad_input else EXIT_FAILED
    for line in said:
        say(line, out=True)
    return code


def _layered_problems(path: Path) -> list[Problem]:
    """The problems of `path` once layered with the files a run in its directory applies
    (a hook the user's config locks, disabled or redefined: valid alone, an error in every
    command once trusted), as `validate` there names them; the other files' are theirs."""
    from ..config.files import NO_DISCOVERY_ENV
    from ..config.loading import load_config
    from ..core.errors import ConfigError

    where = path.absolute()
    environ = {k: v for k, v in os.environ.items() if k != NO_DISCOVERY_ENV}
    try:
        load_config(cwd=where.parent, environ=environ, salvage=True, check_untrusted=True)
    except ConfigError as exc:
        return [p for p in exc.problems if os.path.abspath(p.file) == str(where)]
    return []


def _project_bytes(path: Path) -> tuple[bytes | None, str]:
    """The bytes of a project config file to pin, or None and why it cannot be trusted."""
    from ..config.files import LOCAL_NAMES, read_bytes

    if path.name not in LOCAL_NAMES:
        return None, (
            f"{shown_file(str(path))}: expected a project config file"
            f" ({' or '.join(LOCAL_NAMES)}); other files are not found by discovery, and a file"
            " given with --config is trusted already"
        )
    data, problems = read_bytes(path, str(path))
    return data, "; ".join(str(p) for p in problems)


def _list(as_json: bool) -> int:
    from ..config.statefiles import state_path
    from ..config.truststore import load_state

    where = state_path(os.environ)
    state, why = load_state(where)
    if why is not None:
        return usage("trust", why)
    rows = [_row(key, state) for key in sorted(state.files)]
    if as_json:
        print(json.dumps(rows, indent=2))
    elif not rows:
        shown = shown_file(str(where)) if where else "no state directory"
        print(f"no project config files are trusted ({shown})")
    else:
        for row in rows:
            sha = row["sha256"][:16]
            say(
                f"{row['status']:<8}  {shown_file(row['file'])}  sha256 {sha}…  {row['trustedAt']}",
                out=True,
            )
    return EXIT_OK


def _row(key: str, state: TrustState) -> Mapping[str, str]:
    """One trusted file: `ok` (its bytes are the ones trusted), `changed`, or `missing`."""
    from ..config.files import read_bytes
    from ..config.trust import Verdict, decide, digest

    data, _ = read_bytes(Path(key), key)
    file = state.files[key]
    if data is None:
        status = "missing"
    else:
        status = "ok" if decide(state, key, digest(data)) is Verdict.TRUSTED else "changed"
    return {"file": key, "status": status, "sha256": file.sha256, "trustedAt": file.trusted_at}
