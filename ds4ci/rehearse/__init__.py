"""``ds4ci rehearse``: an adopter's own workflows run under act on this machine, and what the pull request shows.

``fakegithub`` is a stateful fake of the GitHub REST endpoints ds4ci uses, served on 127.0.0.1 (``fakeshapes``
its JSON and GitHub's validation, ``fakeroutes`` its endpoints); ``standins`` writes local composite actions for
the remote ones (checkout, upload-artifact, download-artifact); ``act`` runs one event of a workflow under act in
host mode; ``source`` serves the ds4ci the workflows install (a local repository and a wheelhouse); ``outcome``
reads back what the pull request would show and renders it; ``run`` is the whole rehearsal.
"""
