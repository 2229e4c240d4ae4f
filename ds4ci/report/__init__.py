"""Stage 6: rendering results for people: Markdown sections, tables, the PR comment."""
