"""The README's set-up commands are the ones CI runs."""
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def readme_commands():
    with open(os.path.join(ROOT, "README.md")) as f:
        text = f.read()
    block = re.search(r"```bash\n(.*?)```", text, re.S).group(1)
    return [line.strip() for line in block.strip().splitlines()]


def test_readme_opens_with_two_commands():
    commands = readme_commands()
    assert len(commands) == 2
    assert "examples/quickstart.py" in commands[0]
    assert "pytest" in commands[1]


def test_ci_runs_the_readme_test_command():
    with open(os.path.join(ROOT, ".ci", "run")) as f:
        ci = f.read()
    test_command = readme_commands()[1]
    assert any(line.strip() == test_command for line in ci.splitlines())
