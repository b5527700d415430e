from dlrun.cli.app import main

main()
