from porter.cli import run

run()
