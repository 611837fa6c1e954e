"""Print the settings table from the one settings object: the docs site's Settings page is built from the same
function (scripts/docs_reference.py; tests/shipping/test_docs_site.py checks it against the object).

python -m scripts.settings_table
"""

from scripts.docs_reference import settings_reference

if __name__ == "__main__":
    print(settings_reference(), end="")
