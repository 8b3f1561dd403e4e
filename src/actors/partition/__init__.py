"""The Partition actor: structure and membership, its snapshots, its nodes."""
