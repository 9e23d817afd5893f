from kwarehouse.cli import main

main()
