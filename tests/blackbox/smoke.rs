use serde_json::json;

use crate::util::Env;

#[tokio::test]
async fn stdio_server_answers_a_read_tool() {
    let env = Env::new();
    let (_, token) = env.token("reader", "read");
    let c = env.stdio(&token).await;
    let v = c.call("read_note", json!({"path": "z/attention.md"})).await.ok();
    assert_eq!(v["title"], "Attention");
    assert_eq!(v["path"], "z/attention.md");
    c.close().await;
}
