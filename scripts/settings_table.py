"""Print the README's configuration table from the one settings object (a test keeps them in sync)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from service.settings import ENV_PREFIX, Settings  # noqa: E402


def settings_table() -> str:
    rows = ["| flag | environment variable | default | what it does, and the trade-off |", "|---|---|---|---|"]
    for name, field in Settings.model_fields.items():
        default = "unset" if field.default is None else f"`{field.default}`"
        description = (field.description or "").replace("|", "\\|")
        flag = name.replace("_", "-")
        flag = f"--[no-]{flag}" if field.annotation is bool else f"--{flag}"
        rows.append(f"| `{flag}` | `{ENV_PREFIX}{name.upper()}` | {default} | {description} |")
    return "\n".join(rows)


if __name__ == "__main__":
    print(settings_table())
