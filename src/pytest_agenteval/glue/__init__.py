"""The pytest glue: collection, items, and the controller's recorder and reporter; the only
package (with plugin.py and hookspecs.py) that imports pytest."""
