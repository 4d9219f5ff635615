"""vitviz dashboard: `streamlit run app.py` (or `vitviz app` after `pip install`).

The page itself is vitviz_dashboard/app.py; each tab is a module in vitviz_dashboard/tabs/.
"""

from vitviz_dashboard.app import main

main()
