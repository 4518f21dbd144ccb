"""docs/cli.md lists every command and option by construction: its command block is what
docs/cli_reference.py writes from the parser, and every command and option appears in it."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "docs"))

import cli_reference  # noqa: E402
from simaccel.tvm_integration.tools.cli import build_parser as _parser  # noqa: E402


def test_the_command_block_of_cli_md_is_what_the_parser_gives():
    text = Path(cli_reference.PAGE).read_text(encoding="utf-8")
    assert cli_reference.page_with_commands(text) == text, "run: python docs/cli_reference.py"


def test_every_command_and_option_of_the_parser_is_on_the_page():
    """Independent of how the block is written: each command has its section, each option its row."""
    block = cli_reference.commands_markdown()
    commands = cli_reference._subcommands(_parser())
    assert {"demo", "build", "run", "bench", "fuzz", "conformance", "bisect", "trace", "sanitize", "whatif",
            "ops"} <= set(commands)
    for name, command in commands.items():
        section = block.split(f"### `simaccel {name}`\n", 1)[1].split("\n### ", 1)[0]
        for action in command._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            shown = action.option_strings[-1] if action.option_strings else (action.metavar or action.dest)
            assert f"`{shown}" in section or f", {shown}" in section, (name, shown)
            assert action.help, f"simaccel {name} {shown} has no help text"
