"""Stand-in of lmcache/v1/storage_backend/naive_serde (LMCache/LMCache
naive_serde/naive_serde.py 0e65d2fc0ec3975c78c3ce33a48e81505f315a21):
the naive serializer takes a reference and returns the object itself,
the deserializer returns what it is given."""


class NaiveSerializer:
    def serialize(self, memory_obj):
        memory_obj.ref_count_up()
        return memory_obj


class NaiveDeserializer:
    def deserialize(self, memory_obj):
        return memory_obj


def CreateSerde(serde_type, metadata, config):
    if serde_type != "naive":
        raise ValueError("the stand-in has only the naive serde")
    return NaiveSerializer(), NaiveDeserializer()
