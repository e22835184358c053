"""``python -m ppl_tok.cli``: the ``ppl-tok`` command."""

import sys

from ppl_tok.cli.main import main

sys.exit(main())
