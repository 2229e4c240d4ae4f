"""Stage 7: GitHub: the API client, the publish trust step, comments, statuses, merge gating, dispatch."""
