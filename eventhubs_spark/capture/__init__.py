"""Event Hubs Capture files, read (issue 48): their names (``names``) and their events (``files``)."""
