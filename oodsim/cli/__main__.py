"""``python -m oodsim.cli``: the ``oodsim`` command."""

from oodsim.cli.main import main

raise SystemExit(main())
