"""The Iceberg REST catalog: the embedded server and the clients sinklab connects with."""
