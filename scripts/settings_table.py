"""Print the settings table from the one settings object: the docs site's Settings page is built from the same
function (scripts/docs_reference.py; tests/shipping/test_docs_site.py checks it against the object).

python scripts/settings_table.py
"""

from service.http.settings import settings_table

if __name__ == "__main__":
    print(settings_table())
