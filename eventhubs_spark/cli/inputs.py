"""Values the commands take from a flag or the environment, so secrets stay out of shell history."""

from __future__ import annotations

import os


def secret(value: str | None, env: str, flag: str) -> str:
    found = value or os.environ.get(env)
    if not found:
        raise SystemExit(f"error: pass {flag} or set {env}")
    return found
