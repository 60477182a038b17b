"""The `vpo` command: every subcommand's module exists, parses its arguments and runs."""

import importlib
import subprocess
import sys

import pytest

from vpo.cli import COMMANDS, build_parser


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_subcommand_module_defines_its_parser_and_runner(name):
    module = importlib.import_module(COMMANDS[name][0])
    assert callable(module.add_arguments) and callable(module.run)
    with pytest.raises(SystemExit) as exit_info:  # --help parses and exits 0
        build_parser(name).parse_args([name, "--help"])
    assert exit_info.value.code == 0


def test_unknown_subcommand_is_refused_with_the_known_ones():
    proc = subprocess.run([sys.executable, "-m", "vpo.cli", "evolve"], capture_output=True, text=True)
    assert proc.returncode == 2
    assert "invalid choice: 'evolve'" in proc.stderr and "preprocess" in proc.stderr


def test_help_lists_subcommands_without_importing_torch():
    code = "import sys; from vpo.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass\nprint('torch' in sys.modules)"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "preprocess" in proc.stdout and proc.stdout.strip().endswith("False")
