"""``ds4ci bisect``: the first commit of a range that breaks the gate, found by running the gate itself.

``history`` lists the first-parent commits between the good and the bad end, ``search`` is the binary search
over them (skips included, as ``git bisect skip`` does), ``scratch`` is the one scratch worktree whose HEAD
moves from step to step, ``step`` runs ``ds4ci gate`` as a child on one commit and reads its verdict, and
``outcome`` turns the search into the result document, its text and its comment section.
"""
