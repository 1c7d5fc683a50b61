"""``python -m envsdk COMMAND ...``: the ``envsdk`` command (see :mod:`envsdk.cli.main`)."""

from envsdk.cli.main import entry

if __name__ == "__main__":
    entry()
