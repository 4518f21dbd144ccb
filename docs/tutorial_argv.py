"""The command line the documentation site runs each tutorial with (docs/conf.py, sphinx-gallery's
`reset_argv`, named by its dotted path: Sphinx caches only configuration values it can pickle).

The site runs the tutorials with their exercises' answers: they sit in a section of their own at
the end, after the exercises, so a reader still meets each exercise before its answer.
"""


def answers(gallery_conf, script_vars) -> list[str]:
    return ["--answers"]
