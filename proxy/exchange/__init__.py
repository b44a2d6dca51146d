"""The exchange file: its model, its layout, its bodies and stream frames, what an answer says."""
