use super::rewrite_ports;

#[test]
fn rewrites_each_known_port_and_rejects_the_rest() {
    let text = "a: { port_value: 10000 }\nb:\n  port_value:   8081\nc: { port_value: 10000 }\n";
    assert_eq!(
        rewrite_ports(text, &[(10000, 4), (8081, 55555)]).as_deref(),
        Ok("a: { port_value: 4 }\nb:\n  port_value:   55555\nc: { port_value: 4 }\n")
    );
    let missing = rewrite_ports(text, &[(10000, 4), (8081, 5), (9901, 6)]);
    assert!(missing.is_err_and(|e| e.contains("[9901]")));
    let unknown = rewrite_ports(text, &[(10000, 4)]);
    assert!(unknown.is_err_and(|e| e.contains("port_value: 8081")));
}
