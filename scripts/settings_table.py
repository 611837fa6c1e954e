"""Print the README's configuration table from the one settings object (tests/test_docs.py keeps them equal).

.venv/bin/python scripts/settings_table.py
"""

from service.http.settings import settings_table

if __name__ == "__main__":
    print(settings_table())
