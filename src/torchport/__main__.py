"""`python -m torchport ...`"""

from torchport.cli.main import entry

if __name__ == "__main__":
    entry()
