"""The settings of a run: declared once (model), read and written every way (derive), with the
ladder syntax (ladder) and the value parsers they share (units). Pure: no Locust."""
