from loadgate.entry import main

main()
