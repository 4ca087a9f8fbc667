from events_api.cli import main

raise SystemExit(main())
