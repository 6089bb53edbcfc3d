from lockstep.cli import main

main()
