from tailagent.cli import main

raise SystemExit(main())
