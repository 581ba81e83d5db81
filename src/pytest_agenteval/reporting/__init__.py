"""From stored records to verdicts people read: metrics, summary.json, reports, the CI gate."""
