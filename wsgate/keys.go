package wsgate

// The Redis keys of the stream side all start with one prefix: the hubs'
// keys and channels for sharing their upstream connections below
// "streamgate:ws:v2:" (realtime/share's DefaultPrefix), the stream clients'
// resume records below "streamgate:ws:v1:resume:". The prefix is
// realtime's, which names the stream side's keys; it is declared here
// until realtime exports it, and a test holds the two together.
const streamKeyPrefix = "streamgate:ws:"

// resumeKeyPrefix starts the key of every resume record. Its value is the
// one every release has written, so that a replica upgraded in place reads
// the records the others wrote.
const resumeKeyPrefix = streamKeyPrefix + "v1:resume:"
