from bot.runtime.cli import main

raise SystemExit(main())
