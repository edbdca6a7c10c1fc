"""The command line: typer commands that parse options, call one public function each and
print. Nothing but ``porter.__main__`` imports this package.
"""
