from ddtree_overlay.cli import main

main()
