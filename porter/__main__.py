from porter.cli.app import run

run()
